"""Built-in synthetic corpus for demonstrating and testing deduplication.

``generate_corpus`` builds a deterministic, realistic-looking document collection with known duplicate
structure, so the pipeline can be shown (``python -m gpucurate demo``) and evaluated offline. Of the
``n_docs`` documents (default 3000) about:

* 40% are **unique**: 60-400 words of news-like sentences in English, Russian, German or Korean, built
  from hand-written phrase lists, in paragraphs separated by blank lines;
* 26% are **template** copies: commercial offers, price lists and payment reminders in English, Russian
  and Korean, each "sent" 2-30 times with contact, client, reference, date and amount changed. Word-5-gram
  Jaccard between copies is mostly 0.8-0.95; about one copy in eight was edited more and falls lower;
* 10% are **exact** duplicates of unique or template documents: identical, or differing only in case,
  extra whitespace, full-width digits or no-break spaces (undone by NFKC + lowercase + collapsing spaces);
* 10% are **near** copies of unique documents with 1-5% of the words replaced, inserted or deleted;
* 8% are **short** (< 5 words: "Read more", "Войти", "로그인", ...), each text repeated verbatim;
* 5% are **cjk**: Chinese or Japanese without spaces, 40% of them near copies (1-4% of characters edited);
* 0.5% are **empty** strings, with ``lang`` "und".

``true_cluster`` is the ground truth: exact or near copies of one another share the id of their cluster's
original (its earliest document, except for short and empty texts); every other document has its own id.
Originals are dated 2019-2023, copies 1 hour to 400 days after what they copy. Rows are shuffled so that
copies are not adjacent. All randomness comes from one ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import unicodedata
from datetime import datetime, timezone

import numpy as np
import pandas as pd

from ..errors import ArgumentError  # a ConfigError (CLI: one line, exit 2) and a ValueError

__all__ = ["COLUMNS", "KIND_FRACTIONS", "generate_corpus", "write_demo_corpus"]

#: Share of each kind of document; the rest (about 40%) are unique documents.
KIND_FRACTIONS = {"template": 0.26, "exact": 0.10, "near": 0.10, "short": 0.08, "cjk": 0.05, "empty": 0.005}
COLUMNS = ["id", "text", "timestamp", "lang", "source", "true_cluster"]
_START = int(datetime(2019, 1, 1, tzinfo=timezone.utc).timestamp())
_SPAN, _MAX_DELAY = 5 * 365 * 86400, 400 * 86400          # originals: 2019-2023; copies: up to 400 days later
_SOURCES = np.array(["crawl-a", "crawl-b", "archive-b", "forum-c"], dtype=object)
_MAIL_SOURCES = np.array(["mail-export", "archive-b"], dtype=object)

# Phrase lists ("|"-separated). "P" lists sentence patterns (a repeated one is drawn more often) whose
# {SLOT} holes are filled from the lists; NUM, PCT and YEAR are numbers; "_L" lower-cases the first letter.
_EN = {
    "P": "{SUBJ} {VERB} {OBJ} {TAIL}|{OPEN} {SUBJ_L} {VERB} {OBJ}.|In {YEAR}, {SUBJ_L} {VERB} {OBJ} {TAIL}|"
         "{SUBJ} {VERB} {OBJ}, and {SUBJ_L} {VERB} {OBJ} {TAIL}",
    "SUBJ": "The city council|Our research team|A local bakery|The new manager|The regional hospital|My neighbor|"
            "The software company|A group of volunteers|The history museum|The football club|The planning "
            "committee|An independent journalist|The harbor authority|A retired teacher|The university library",
    "VERB": "announced|reviewed|discussed|postponed|approved|criticized|published|redesigned|tested|questioned|"
            "finally completed|quietly expanded|rejected|defended|presented|funded|simplified|delayed",
    "OBJ": "a plan to renovate the old library|the annual budget|a new recycling program|the results of the "
           "survey|the design of the new bridge|the winter train schedule|its quarterly sales report|an online "
           "booking system|the parking rules downtown|the lunch menu for local schools|a proposal to extend the "
           "bike lanes|the opening hours of the swimming pool|a study on air quality|a festival of independent "
           "films|a course on digital skills for seniors|a series of free evening concerts",
    "TAIL": "last week.|after months of debate.|despite heavy rain.|on Tuesday morning.|without much explanation.|"
            "to the surprise of many residents.|ahead of the summer season.|during a short press conference.|"
            "at the request of local businesses.|for the second time this year.",
    "OPEN": "Last spring,|According to the report,|On Monday,|Earlier this year,|As expected,|Surprisingly,|"
            "Two years ago,|After a heated meeting,|Yesterday,",
}
_RU = {
    "P": "{SUBJ} {VERB} {OBJ} {TAIL}|{OPEN} {SUBJ_L} {VERB} {OBJ}.|До конца {YEAR} года {SUBJ_L} {VERB} {OBJ}.|"
         "{SUBJ} {VERB} {OBJ}, а {SUBJ_L} {VERB} {OBJ} {TAIL}",
    "SUBJ": "Городская администрация|Наша исследовательская группа|Местная пекарня|Новый директор|Областная "
            "больница|Мой сосед|Крупная IT-компания|Группа волонтёров|Исторический музей|Футбольный клуб|"
            "Независимый журналист|Администрация порта|Пожилая учительница|Университетская библиотека",
    "VERB": "обсуждает|пересматривает|откладывает|утверждает|критикует|публикует|обновляет|тестирует|"
            "представляет|поддерживает|финансирует|упрощает|отменяет|изучает|запускает|готовит",
    "OBJ": "план реконструкции старой библиотеки|годовой бюджет|новую программу переработки отходов|результаты "
           "опроса жителей|проект нового моста|зимнее расписание поездов|квартальный отчёт о продажах|систему "
           "онлайн-бронирования|правила парковки в центре|меню для школьных столовых|предложение продлить "
           "велодорожки|график работы бассейна|исследование качества воздуха|фестиваль независимого кино|"
           "курс цифровой грамотности для пенсионеров|программу бесплатных вечерних концертов",
    "TAIL": "уже на этой неделе.|после долгих споров.|несмотря на сильный дождь.|в понедельник утром.|без "
            "особых объяснений.|к удивлению многих жителей.|перед началом летнего сезона.|на короткой "
            "пресс-конференции.|по просьбе местных предпринимателей.|второй раз за год.",
    "OPEN": "Сейчас|По словам экспертов,|Как сообщает пресс-служба,|В эти дни|Кроме того,|Как и ожидалось,|"
            "Неожиданно для всех|Тем временем|На этой неделе",
}
_DE = {
    "P": "{SUBJ} {VERB} {OBJ} {TAIL}|{OPEN} {VERB} {SUBJ_L} {OBJ}.|Im Jahr {YEAR} {VERB} {SUBJ_L} {OBJ}.|"
         "{SUBJ} {VERB} {OBJ}, und {SUBJ_L} {VERB} {OBJ} {TAIL}",
    "SUBJ": "Der Stadtrat|Unser Forschungsteam|Eine kleine Bäckerei|Die neue Geschäftsführerin|Mein Nachbar|"
            "Das Heimatmuseum|Der Fußballverein|Die junge Autorin|Der Planungsausschuss|Die Schulleitung|Ein "
            "unabhängiger Journalist|Die Hafenbehörde|Ein pensionierter Lehrer|Das Tierheim",
    "VERB": "prüfte|diskutierte|verschob|genehmigte|kritisierte|veröffentlichte|testete|plante|überarbeitete|"
            "finanzierte|präsentierte|erweiterte|verteidigte|stoppte|vereinfachte|bewertete",
    "OBJ": "den Plan zur Renovierung der alten Bibliothek|das jährliche Budget|ein neues Recyclingprogramm|die "
           "Ergebnisse der Umfrage|den Entwurf der neuen Brücke|den Winterfahrplan der Regionalbahn|den "
           "Quartalsbericht|ein Online-Buchungssystem|die Parkregeln in der Innenstadt|den Speiseplan der "
           "Schulkantinen|einen Vorschlag für längere Radwege|die Öffnungszeiten des Hallenbads|eine Studie zur "
           "Luftqualität|einen Computerkurs für Senioren|eine Reihe kostenloser Abendkonzerte",
    "TAIL": "in der vergangenen Woche.|nach monatelanger Debatte.|trotz starken Regens.|am Dienstagmorgen.|ohne "
            "nähere Begründung.|zur Überraschung vieler Anwohner.|kurz vor der Sommersaison.|auf einer kurzen "
            "Pressekonferenz.|auf Wunsch der lokalen Händler.|zum zweiten Mal in diesem Jahr.",
    "OPEN": "Im Frühjahr|Laut dem Bericht|Am Montag|Anfang des Jahres|Wie erwartet|Überraschenderweise|Vor zwei "
            "Jahren|Nach einer hitzigen Sitzung|Gestern",
}
_KO = {
    "P": "{TIME} {SUBJ} {MANNER} {OBJ} {VERB}|{SUBJ} {OBJ} {VERB}|{YEAR}년에 {SUBJ} {MANNER} {OBJ} {VERB}|"
         "{TIME} {SUBJ} {OBJ} {VERB}",
    "TIME": "어제|지난주에|오늘 오전|올해 초|지난달|최근|며칠 전|이번 주에|지난 금요일|작년 가을",
    "SUBJ": "시청은|우리 연구팀은|동네 빵집은|새로 온 팀장은|지역 병원은|옆집 이웃은|소프트웨어 회사는|자원봉사 "
            "단체는|역사 박물관은|지역 축구 클럽은|젊은 작가는|도시계획 위원회는|독립 기자는|시립 오케스트라는|"
            "항만공사는|은퇴한 교사는|대학 도서관은|교통국은|마을 협동조합은|기상청은|동물 보호소는",
    "MANNER": "주민들과 함께|예상보다 빠르게|오랜 논의 끝에|비가 많이 오는데도|별다른 설명 없이|많은 사람들의 "
              "예상과 달리|여름 성수기를 앞두고|짧은 기자회견에서|지역 상인들의 요청으로|올해 들어 두 번째로",
    "OBJ": "도서관 리모델링 계획을|연간 예산을|새로운 재활용 프로그램을|주민 설문 조사 결과를|새 다리의 설계안을|"
           "겨울철 열차 시간표를|분기별 판매 보고서를|온라인 예약 시스템을|도심 주차 규정을|학교 급식 메뉴를|"
           "자전거 도로 연장 제안을|수영장 운영 시간을|대기 질 연구를|독립 영화제를|음식물 쓰레기 줄이기 캠페인을|"
           "어르신을 위한 디지털 교육 과정을|월 정기권 가격을|무료 저녁 음악회 프로그램을|심야 버스 노선 확대를",
    "VERB": "발표했습니다.|검토했습니다.|논의했다.|연기했습니다.|승인했다.|비판했습니다.|공개했다.|새로 "
            "설계했습니다.|시험 운영했다.|마침내 완료했습니다.|조용히 확대했다.|거절했습니다.|지지했다.|소개했습니다.",
}
_ZH = {
    "P": "{TIME}{SUBJ}{ADV}{VERB}{OBJ}。|{SUBJ}{TIME}{VERB}{OBJ}。|{YEAR}年，{SUBJ}{ADV}{VERB}{OBJ}。",
    "TIME": "去年|上个月|今天上午|近日|今年年初|上周五|前几天|本周",
    "SUBJ": "市政府|我们的研究小组|一家本地面包店|新来的经理|区医院|一家软件公司|一群志愿者|历史博物馆|足球俱乐部|"
            "这位年轻作家|规划委员会|一名独立记者|城市交响乐团|港口管理局|大学图书馆|交通局",
    "ADV": "正式|再次|悄悄地|最终|公开|临时|突然|顺利",
    "VERB": "公布了|审议了|推迟了|批准了|批评了|发布了|测试了|完成了|扩大了|否决了|介绍了|资助了",
    "OBJ": "图书馆改造计划|年度预算|新的垃圾回收项目|居民问卷调查结果|新桥的设计方案|冬季列车时刻表|季度销售报告|"
           "网上预约系统|市中心停车规定|学校午餐菜单|游泳馆开放时间|空气质量研究报告|独立电影节|中心广场改建工程",
}
_JA = {
    "P": "{TIME}{SUBJ}{OBJ}{VERB}|{SUBJ}{TIME}{OBJ}{VERB}|{YEAR}年、{SUBJ}{OBJ}{VERB}",
    "TIME": "昨年、|先月、|今朝、|最近、|今年の初めに、|先週の金曜日、|数日前、|今週、",
    "SUBJ": "市役所は|私たちの研究チームは|地元のパン屋は|新しい部長は|地域の病院は|あるソフトウェア会社は|"
            "ボランティア団体は|歴史博物館は|サッカークラブは|若い作家は|計画委員会は|市民オーケストラは|港湾局は",
    "OBJ": "図書館の改修計画を|年間予算を|新しいリサイクル制度を|住民アンケートの結果を|新しい橋の設計案を|冬のダイヤを|"
           "四半期の売上報告を|オンライン予約システムを|中心部の駐車ルールを|学校給食の献立を|プールの営業時間を",
    "VERB": "発表しました。|見直しました。|延期しました。|承認しました。|批判しました。|公開しました。|"
            "試験的に導入しました。|ついに完了しました。|拡大しました。|却下しました。|紹介しました。",
}
# Business phrases for the bodies of templates.
_BIZ_EN = {
    "P": "{SUBJ} {VERB} {OBJ} {TAIL}|{SUBJ} {VERB} {OBJ} {TAIL}|{SUBJ} {VERB} {OBJ} {TAIL}|We also offer {OBJ} "
         "{TAIL}|Orders above {NUM} units qualify for a {PCT}% discount on {OBJ}.|{NOTE}",
    "SUBJ": "Our company|Our logistics team|The service department|Our warehouse in Rotterdam|The quality control "
            "team|The customer support desk|Our production site|The project office",
    "VERB": "supplies|delivers|installs|guarantees|maintains|offers|prepares|inspects|assembles|tests",
    "OBJ": "industrial pumps and valves|office furniture for open-space layouts|spare parts for packaging lines|"
           "stainless steel pipes of all diameters|LED lighting for warehouses|cleaning chemicals for food "
           "production|ergonomic chairs and standing desks|security cameras with cloud storage|refrigeration "
           "units for retail|hydraulic hoses and fittings|solar panels for flat roofs",
    "TAIL": "within ten business days.|at wholesale prices.|with a two-year warranty.|across the whole region.|"
            "according to ISO 9001 standards.|on flexible payment terms.|directly to your site.|from stock "
            "without delay.|together with full technical documentation.",
    "NOTE": "Payment is accepted by bank transfer.|All prices include packaging.|Delivery costs are calculated "
            "separately.|Samples are available on request.|Discounts apply to repeat orders.",
}
_BIZ_RU = {
    "P": "{SUBJ} {VERB} {OBJ} {TAIL}|{SUBJ} {VERB} {OBJ} {TAIL}|{SUBJ} {VERB} {OBJ} {TAIL}|Мы также предлагаем "
         "{OBJ} {TAIL}|При заказе от {NUM} единиц действует скидка {PCT}% на {OBJ}.|{NOTE}",
    "SUBJ": "Наша компания|Наш логистический отдел|Сервисный отдел|Наш склад в Подмосковье|Отдел контроля "
            "качества|Служба поддержки клиентов|Наше производство|Проектный офис|Региональный филиал",
    "VERB": "поставляет|доставляет|устанавливает|гарантирует|обслуживает|предлагает|подготавливает|проверяет",
    "OBJ": "промышленные насосы и задвижки|офисную мебель для открытых пространств|запчасти для упаковочных линий|"
           "трубы из нержавеющей стали любого диаметра|светодиодное освещение для складов|моющие средства для "
           "пищевого производства|эргономичные кресла и столы|камеры видеонаблюдения с облачным хранением|"
           "холодильное оборудование для магазинов|гидравлические шланги и фитинги",
    "TAIL": "в течение десяти рабочих дней.|по оптовым ценам.|с гарантией два года.|по всей области.|в "
            "соответствии со стандартом ISO 9001.|на гибких условиях оплаты.|прямо на ваш объект.|со склада без "
            "задержек.|вместе с полной технической документацией.",
    "NOTE": "Оплата принимается банковским переводом.|Все цены указаны с учётом упаковки.|Стоимость доставки "
            "рассчитывается отдельно.|Образцы предоставляются по запросу.|Постоянным клиентам — скидки.",
}
_BIZ_KO = {
    "P": "{SUBJ} {OBJ} {TAIL} {VERB}|{SUBJ} {OBJ} {TAIL} {VERB}|{SUBJ} {OBJ} {TAIL} {VERB}|또한 {OBJ} {TAIL} "
         "{VERB}|{NUM}개 이상 주문하시면 {PCT}% 할인이 적용됩니다.|{NOTE}",
    "SUBJ": "저희 회사는|저희 물류팀은|서비스 부서는|인천 물류센터는|품질관리팀은|고객지원센터는|저희 생산 공장은",
    "OBJ": "산업용 펌프와 밸브를|개방형 사무실용 가구를|포장 라인용 예비 부품을|다양한 규격의 스테인리스 강관을|창고용 "
           "LED 조명을|식품 공장용 세척제를|인체공학 의자와 스탠딩 책상을|클라우드 저장 기능이 있는 보안 카메라를|"
           "매장용 냉장 설비를|유압 호스와 피팅을|평지붕용 태양광 패널을",
    "TAIL": "영업일 기준 10일 이내에|도매가로|2년 무상 보증과 함께|전국 어디든|ISO 9001 기준에 따라|유연한 결제 "
            "조건으로|고객 현장까지 직접|재고에서 즉시|전체 기술 문서와 함께",
    "VERB": "공급합니다.|배송합니다.|설치해 드립니다.|보증합니다.|유지보수합니다.|제공합니다.|준비해 드립니다.",
    "NOTE": "결제는 계좌 이체로 가능합니다.|모든 가격에는 포장비가 포함되어 있습니다.|배송비는 별도로 계산됩니다.|"
            "요청하시면 샘플을 보내 드립니다.|재주문 고객께는 추가 할인이 적용됩니다.",
}
# Template skeletons. Fixed per template: {body}, {items}, {sender}, {company}; changed for every
# recipient: {contact}, {client}, {ref}, {date}, {amount} (few, and close together, as in real mail).
_SKELETONS = {
    "en": {"offer": "Dear {contact},\n\nThank you for your interest in our products. On behalf of {company}, we "
                    "are pleased to send {client} our commercial offer for the coming season.\n\n{body}\n\n"
                    "The total value of this offer is {amount} USD (quote {ref}, valid until {date}).\n\n"
                    "Best regards,\n{sender}\n{company}",
           "price_list": "Hello {contact},\n\nPlease find below the updated price list prepared for {client}.\n\n"
                         "{items}\n\n{body}\n\nYour discount code is {ref}; prices are valid until {date}. "
                         "Estimated order total: {amount} USD.\n\nKind regards,\n{sender}\n{company}",
           "letter": "Dear {contact},\n\nWe are writing to {client} regarding invoice {ref} dated {date} for the "
                     "amount of {amount} USD.\n\n{body}\n\nSincerely,\n{sender}\nAccounts department, {company}"},
    "ru": {"offer": "Добрый день, {contact}!\n\nБлагодарим вас за интерес к нашей продукции. Компания {company} "
                    "рада направить {client} коммерческое предложение на текущий сезон.\n\n{body}\n\n"
                    "Общая стоимость предложения составляет {amount} руб. (предложение № {ref}, действительно "
                    "до {date}).\n\nС уважением,\n{sender}\n{company}",
           "price_list": "Здравствуйте, {contact}!\n\nНаправляем актуальный прайс-лист для {client}.\n\n"
                         "{items}\n\n{body}\n\nВаш персональный код скидки: {ref}. Цены действительны до {date}. "
                         "Предварительная сумма заказа: {amount} руб.\n\nС уважением,\n{sender}\n{company}",
           "letter": "Добрый день, {contact}!\n\nНапоминаем {client} об оплате счёта № {ref} от {date} на сумму "
                     "{amount} руб.\n\n{body}\n\nС уважением,\n{sender}\nБухгалтерия {company}"},
    "ko": {"offer": "{contact}님께\n\n저희 제품에 관심을 가져 주셔서 감사합니다. {company}는 {client} 앞으로 이번 시즌 "
                    "견적서를 보내 드립니다.\n\n{body}\n\n총 견적 금액은 {amount}원입니다 (견적 번호 {ref}, 유효기간 "
                    "{date}까지).\n\n감사합니다.\n{sender} 드림\n{company}",
           "price_list": "안녕하세요, {contact}님.\n\n{client} 전용 최신 가격표를 보내 드립니다.\n\n{items}\n\n{body}"
                         "\n\n할인 코드는 {ref}이며, 가격은 {date}까지 유효합니다. 예상 주문 금액: {amount}원.\n\n"
                         "감사합니다.\n{sender} 드림\n{company}",
           "letter": "{contact}님께\n\n{client}의 청구서 {ref}({date} 발행, 금액 {amount}원)에 대한 결제를 "
                     "안내드립니다.\n\n{body}\n\n감사합니다.\n{sender} 드림\n{company} 회계팀"},
}
_REF_PREFIX = {"offer": "Q", "price_list": "PL", "letter": "INV"}
_CURRENCY = {"en": " USD", "ru": " руб.", "ko": "원"}
_DATE_FORMAT = {"en": lambda iso: iso, "ru": lambda iso: f"{iso[8:]}.{iso[5:7]}.{iso[:4]}",
                "ko": lambda iso: iso.replace("-", ".")}


def _combos(first: str, second: str, sep: str = " ") -> list[str]:
    return [a + sep + b for a in first.split("|") for b in second.split("|")]


_NAMES = {
    "en": _combos("James|Olivia|Michael|Emma|Daniel|Sophia|David|Grace|Thomas|Chloe|Samuel|Laura",
                  "Carter|Nguyen|Walsh|Patel|Brooks|Foster|Hughes|Reed|Bennett|Morgan|Turner|Ellis"),
    "ru": _combos("Иван|Алексей|Дмитрий|Сергей|Андрей|Павел", "Петров|Смирнов|Кузнецов|Волков|Соколов|Лебедев")
    + _combos("Анна|Елена|Ольга|Мария|Татьяна|Ирина", "Петрова|Смирнова|Кузнецова|Волкова|Соколова|Лебедева"),
    "ko": _combos("김|이|박|최|정|강|조|윤|장|임", "민준|서연|지훈|하은|도윤|수빈|현우|지민|예린|준호", ""),
}
_COMPANIES = {
    "en": _combos("Northwind|Bluefield|Harbor|Summit|Redwood|Silverline|Brightwater|Ironbridge|Oakmont|Westgate",
                  "Trading|Logistics|Supplies|Industries|Retail|Foods|Engineering|Hotels"),
    "ru": _combos("ООО|АО", "«Вектор»|«Северный ветер»|«СтройМастер»|«Альфа-Трейд»|«ТехноПром»|«Волга-Сервис»|"
                  "«Меридиан»|«Гранит»|«Орион»|«Прогресс»"),
    "ko": _combos("한빛|대한|미래|동방|서해|새롬|한결|푸른|태양|누리", "상사|테크|코리아|푸드|로지스", ""),
}
_PRODUCTS = {
    "en": "Centrifugal pump CP-40|Stainless valve DN50|Office chair Ergo Plus|LED panel 60x60|Stretch film 23 mic|"
          "Safety gloves (12 pairs)|Hydraulic hose 1/2 inch|Label printer LP-200|Standing desk 160 cm|Fan 450 W",
    "ru": "Насос центробежный ЦН-40|Задвижка стальная Ду50|Кресло офисное «Эрго»|Светильник LED 36 Вт|"
          "Стретч-плёнка 23 мкм|Перчатки рабочие (12 пар)|Рукав гидравлический 1/2 дюйма|Принтер этикеток ПЭ-200",
    "ko": "원심 펌프 CP-40|스테인리스 밸브 DN50|사무용 의자 에르고 플러스|LED 패널 60x60|스트레치 필름 23마이크론|"
          "작업용 장갑 (12켤레)|유압 호스 1/2인치|라벨 프린터 LP-200|높이 조절 책상 160cm|산업용 선풍기 450W",
}
_SHORT = [(lang, text) for lang, texts in [
    ("en", "Thanks!|Read more|Page not found|Click here to subscribe|Share this post|Cookie settings|Loading...|"
           "404 Not Found|All rights reserved|Next page|Sign in|Contact us|Back to top|Copyright 2023 Acme Inc."),
    ("ru", "Спасибо!|Читать далее|Страница не найдена|Подписаться на рассылку|Войти|Назад|Главная страница|"
           "Все права защищены|Оставить комментарий"),
    ("ko", "감사합니다|더 보기|로그인|페이지를 찾을 수 없습니다|구독하기|이전 페이지|댓글 남기기|모든 권리 보유"),
    ("de", "Impressum|Weiterlesen|Alle Rechte vorbehalten|Seite nicht gefunden|Jetzt abonnieren|Zurück"),
] for text in texts.split("|")]


class _Grammar:
    """Sentence generator: patterns whose ``{SLOT}`` holes are filled from phrase lists.

    Sizes are counted in words, or in characters for scripts written without spaces (``sep=""``).
    """

    def __init__(self, spec: dict[str, str], sep: str = " "):
        lists = {key: value.split("|") for key, value in spec.items() if key != "P"}
        self.vocab = sorted({word for items in lists.values() for s in items for word in s.split()})
        lists.update(NUM=[str(i) for i in range(2, 99)], YEAR=[str(y) for y in range(2012, 2026)],
                     PCT=["3", "5", "7", "10", "12", "15", "20"])
        lists.update({key + "_L": [s[:1].lower() + s[1:] for s in items] for key, items in list(lists.items())})
        self.sep = sep
        self.unit = len if sep == "" else (lambda s: s.count(" "))       # additive under concatenation
        self.slots = {key: (np.array(items, dtype=object), np.array([self.unit(s) for s in items]))
                      for key, items in lists.items()}
        self.patterns = [re.split(r"\{(\w+)\}", p) for p in spec["P"].split("|")]   # odd items: slot names
        self.mean_size = (sep == " ") + np.mean([sum(self.slots[part][1].mean() if i % 2 else self.unit(part)
                                                     for i, part in enumerate(parts)) for parts in self.patterns])

    def sentences(self, rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray]:
        """``m`` random sentences (object array) and their sizes, built vectorized per pattern."""
        which = rng.integers(0, len(self.patterns), m)
        texts, sizes = np.empty(m, dtype=object), np.zeros(m, dtype=np.int64)
        for p, parts in enumerate(self.patterns):
            rows = np.flatnonzero(which == p)
            acc, size = np.full(rows.size, "", dtype=object), np.zeros(rows.size, dtype=np.int64)
            for i, part in enumerate(parts):
                if i % 2:
                    items, units = self.slots[part]
                    pick = rng.integers(0, len(items), rows.size)
                    acc, size = acc + items[pick], size + units[pick]
                elif part:
                    acc, size = acc + part, size + self.unit(part)
            texts[rows], sizes[rows] = acc, size
        return texts, sizes + (self.sep == " ")                        # words = spaces + 1

    def documents(self, rng: np.random.Generator, targets: np.ndarray) -> list[str]:
        """One text per target size: whole sentences, about one in four ending a paragraph."""
        texts, sizes = self.sentences(rng, int(np.sum(targets) / self.mean_size) + len(targets) + 16)
        cum, spans, start = np.cumsum(sizes), [], 0
        for target in targets:
            goal = (cum[start - 1] if start else 0) + target
            while cum[-1] < goal:                                        # ran out: append another batch
                more, more_sizes = self.sentences(rng, len(texts) // 2 + 16)
                texts, cum = np.concatenate([texts, more]), np.concatenate([cum, cum[-1] + np.cumsum(more_sizes)])
            spans.append((start, int(np.searchsorted(cum, goal)) + 1))
            start = spans[-1][1]
        glued = texts[:start] + np.where(rng.random(start) < 0.25, "\n\n", self.sep).astype(object)
        return ["".join(glued[a:b - 1]) + texts[b - 1] for a, b in spans]


_GENERAL = {lang: _Grammar(spec, "" if lang in ("zh", "ja") else " ")
            for lang, spec in [("en", _EN), ("ru", _RU), ("de", _DE), ("ko", _KO), ("zh", _ZH), ("ja", _JA)]}
_BUSINESS = {"en": _Grammar(_BIZ_EN), "ru": _Grammar(_BIZ_RU), "ko": _Grammar(_BIZ_KO)}


def _money(value: float, lang: str) -> str:
    """Amount as one token in the language's usual notation: 12,480.00 / 12480,00 / 12,480,000 (won)."""
    if lang == "ko":
        return f"{int(value) * 1000:,}"
    return f"{value:.2f}".replace(".", ",") if lang == "ru" else f"{value:,.2f}"


def _edit(text: str, rate: float, rng: np.random.Generator, vocab: list[str] | None = None) -> str:
    """Replace, insert or delete about ``rate`` of the words (new ones from ``vocab``) or, without
    ``vocab``, of the characters (new ones taken from the text). Line breaks are kept."""
    tokens = text.split(" ") if vocab is not None else list(text)
    pool = vocab if vocab is not None else tokens[:]
    k = max(1, round(rate * len(tokens)))
    picks = np.unique(rng.integers(0, len(tokens), size=k))[::-1]       # back to front: indices stay valid
    ops, new = rng.integers(0, 3, size=k), rng.integers(0, len(pool), size=k)
    for i, op, token in zip(picks.tolist(), ops.tolist(), [pool[j] for j in new.tolist()]):
        if token == "\n":
            continue
        if op == 1 or "\n" in tokens[i] or tokens[i] == token:    # keep line breaks; always change
            tokens.insert(i, token)
        elif op == 2 and len(tokens) > 1:
            del tokens[i]
        else:
            tokens[i] = token
    return (" " if vocab is not None else "").join(tokens)


def _normalized(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def _surface_variant(text: str, mode: int, rng: np.random.Generator) -> str:
    """A copy equal after normalization: 0 identical, 1 case, 2 whitespace, 3 full-width digits, 4 NBSP."""
    if mode == 1:
        out = text.upper() if rng.random() < 0.5 else text.lower()
        return out if _normalized(out) == _normalized(text) else text  # "ß".upper() is "SS"
    if mode == 2:
        return "  " + text.replace(". ", ".  ").replace("\n\n", "\n \n\n") + "\n"
    if mode == 3:
        for char in "0123456789%":
            text = text.replace(char, chr(ord(char) + 0xFEE0))        # full-width forms U+FF05, U+FF10..
        return text
    if mode == 4:
        parts = text.split(" ")
        glued = np.empty(2 * len(parts) - 1, dtype=object)
        glued[0::2], glued[1::2] = parts, np.where(rng.random(len(parts) - 1) < 0.3, "\u00a0", " ")
        return "".join(glued.tolist())
    return text


class _Builder:
    """Collects rows in generation order; :meth:`frame` shuffles them and assigns ids."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.text, self.lang, self.kind, self.ts, self.root = [], [], [], [], []

    def add(self, texts: list[str], lang, ts, kind: str, roots=None) -> None:
        start, n = len(self.text), len(texts)
        self.text += texts
        self.lang += [lang] * n if isinstance(lang, str) else list(lang)
        self.kind += [kind] * n
        self.ts += np.asarray(ts, dtype=np.int64).tolist()
        self.root += list(range(start, start + n)) if roots is None else np.asarray(roots).tolist()

    def add_copies(self, src: np.ndarray, texts: list[str], kind: str) -> None:
        """Copies of rows ``src``, dated 1 hour to 400 days after them, in their clusters."""
        ts = np.array(self.ts, dtype=np.int64)[src] + self.rng.integers(3600, _MAX_DELAY, size=len(src))
        self.add(texts, [self.lang[s] for s in src], ts, kind, [self.root[s] for s in src])

    def when(self, n: int) -> np.ndarray:
        return _START + self.rng.integers(0, _SPAN, size=n)

    def rows_of(self, kind: str) -> np.ndarray:
        return np.flatnonzero(np.array(self.kind) == kind)

    def add_originals(self, count: int, langs: list[str], p: list[float], lo: int, hi: int, kind: str) -> None:
        """``count`` fresh documents of ``lo``-``hi`` words (characters for zh/ja), skewed short."""
        lang_of = self.rng.choice(langs, size=count, p=p)
        sizes = np.clip(self.rng.lognormal(np.log(lo + (hi - lo) / 4), 0.55, size=count), lo, hi).astype(np.int64)
        for lang in langs:
            texts = _GENERAL[lang].documents(self.rng, sizes[lang_of == lang])
            self.add(texts, lang, self.when(len(texts)), kind)

    def add_templates(self, total: int) -> None:
        rng, sizes = self.rng, []
        while total >= 2:
            size = min(int(rng.geometric(0.14)) + 1, 30, total)
            size += 1 if total - size == 1 else 0                        # never leave one copy over
            sizes.append(size)
            total -= size
        k, n = len(sizes), sum(sizes)
        langs = rng.choice(["en", "ru", "ko"], size=k, p=[0.4, 0.33, 0.27])
        kinds = rng.choice(list(_REF_PREFIX), size=k)
        bodies = np.empty(k, dtype=object)
        for lang, grammar in _BUSINESS.items():
            bodies[langs == lang] = grammar.documents(rng, rng.integers(190, 400, size=int(np.sum(langs == lang))))
        per_template = rng.random((k, 5))                  # sender, company, date, amount, price list length
        items, prices = rng.random((k, 10)).argsort(axis=1), rng.uniform(5, 2000, (k, 10))
        per_copy = rng.random((n, 2))                                    # contact, client
        refs, scale = rng.integers(10000, 100000, size=n).tolist(), rng.uniform(0.5, 2, size=n)
        delays = rng.integers(3600, _MAX_DELAY, size=n)
        edits = np.where(rng.random(n) < 0.12, rng.uniform(0.04, 0.12, size=n), 0.0)   # heavier-edited copies
        first = np.cumsum([0] + sizes)[:-1]
        delays[first], edits[first] = 0, 0.0                             # each template's original comes first
        ts = np.repeat(_START + (per_template[:, 2] * _SPAN).astype(np.int64), sizes) + delays
        due = np.datetime_as_string((ts + 14 * 86400).astype("datetime64[s]"), unit="D").tolist()
        for t, (size, lang, kind, body) in enumerate(zip(sizes, langs.tolist(), kinds.tolist(), bodies)):
            names, companies, products = _NAMES[lang], _COMPANIES[lang], _PRODUCTS[lang].split("|")
            listed = [p for p in items[t].tolist() if p < len(products)][:5 + int(5 * per_template[t, 4])]
            price_list = "\n".join(f"{i}. {products[p]} — {_money(prices[t, p], lang)}{_CURRENCY[lang]}"
                                   for i, p in enumerate(listed, 1))
            skeleton = (_SKELETONS[lang][kind].replace("{body}", body).replace("{items}", price_list)
                        .replace("{sender}", names[int(per_template[t, 0] * len(names))])
                        .replace("{company}", companies[int(per_template[t, 1] * len(companies))]))
            texts = []
            for c in range(first[t], first[t] + size):
                text = skeleton.format(contact=names[int(per_copy[c, 0] * len(names))],
                                       client=companies[int(per_copy[c, 1] * len(companies))],
                                       ref=f"{_REF_PREFIX[kind]}-{refs[c]}", date=_DATE_FORMAT[lang](due[c]),
                                       amount=_money((500 + 49500 * per_template[t, 3]) * scale[c], lang))
                texts.append(_edit(text, edits[c], rng, _BUSINESS[lang].vocab) if edits[c] else text)
            self.add(texts, lang, ts[first[t]:first[t] + size], "template", [len(self.text)] * size)

    def add_exact(self, count: int) -> None:
        unique, template = self.rows_of("unique"), self.rows_of("template")
        src = unique[self.rng.integers(0, len(unique), size=count)]
        if len(template):                                               # a fifth copy template mail
            swap = self.rng.random(count) < 0.2
            src[swap] = template[self.rng.integers(0, len(template), size=int(swap.sum()))]
        modes = self.rng.choice(5, size=count, p=[0.4, 0.15, 0.15, 0.15, 0.15]).tolist()
        self.add_copies(src, [_surface_variant(self.text[s], m, self.rng) for s, m in zip(src, modes)], "exact")

    def add_edited(self, count: int, kind: str, low: float, high: float) -> None:
        """``count`` near copies of random ``kind`` originals with ``low``-``high`` of the tokens edited."""
        pool = self.rows_of(kind)
        src, rates = pool[self.rng.integers(0, len(pool), size=count)], self.rng.uniform(low, high, size=count)
        vocab = [None if kind == "cjk" else _GENERAL[self.lang[s]].vocab for s in src]
        texts = [_edit(self.text[s], r, self.rng, v) for s, r, v in zip(src, rates, vocab)]
        self.add_copies(src, texts, "cjk" if kind == "cjk" else "near")

    def add_short_and_empty(self, n_short: int, n_empty: int) -> None:
        picks = self.rng.integers(0, len(_SHORT), size=n_short)
        _, first, inverse = np.unique(picks, return_index=True, return_inverse=True)
        self.add([_SHORT[p][1] for p in picks], [_SHORT[p][0] for p in picks], self.when(n_short), "short",
                 len(self.text) + first[inverse.ravel()])
        self.add([""] * n_empty, "und", self.when(n_empty), "empty", [len(self.text)] * n_empty)

    def frame(self, include_kind: bool) -> pd.DataFrame:
        n, rng = len(self.text), self.rng
        order = rng.permutation(n)
        position = np.empty(n, dtype=np.int64)
        position[order] = np.arange(n)
        ids = np.array([f"doc-{p + 1:0{max(6, len(str(n)))}d}" for p in range(n)], dtype=object)
        kind = np.array(self.kind, dtype=object)[order]
        source = np.where(kind == "template", _MAIL_SOURCES[rng.integers(0, 2, size=n)],
                          _SOURCES[rng.integers(0, len(_SOURCES), size=n)])
        stamps = np.datetime_as_string(np.array(self.ts, dtype=np.int64)[order].astype("datetime64[s]"))
        data = {"id": ids.tolist(), "text": [self.text[i] for i in order],
                "timestamp": [s + "Z" for s in stamps.tolist()], "lang": [self.lang[i] for i in order],
                "source": source.tolist(),
                "true_cluster": ids[position[np.array(self.root, dtype=np.int64)[order]]].tolist()}
        if include_kind:
            data["kind"] = kind.tolist()
        return pd.DataFrame(data, columns=list(data))


def generate_corpus(n_docs: int = 3000, seed: int = 0, include_kind: bool = False) -> pd.DataFrame:
    """Generate the synthetic demo corpus (its contents are described in the module docstring).

    Parameters
    ----------
    n_docs : int, default 3000
        Number of documents (rows).
    seed : int, default 0
        Seed of the one ``numpy.random.default_rng`` used; equal ``(n_docs, seed)`` give equal frames.
    include_kind : bool, default False
        Add a ``kind`` column: "unique", "template", "exact", "near", "short", "cjk" or "empty".

    Returns
    -------
    pandas.DataFrame
        String columns ``id`` ("doc-000001", ...), ``text``, ``timestamp`` (ISO-8601 UTC,
        "2021-03-05T10:00:00Z"), ``lang`` ("en", "ru", "de", "ko", "zh", "ja"; "und" for empty texts),
        ``source`` and ``true_cluster`` (id of the cluster's original); rows shuffled, default index.
    """
    if n_docs < 0:
        raise ArgumentError(f"the number of documents (n_docs, --docs) must be >= 0, got {n_docs}")
    counts = {kind: int(frac * n_docs) for kind, frac in KIND_FRACTIONS.items()}
    if counts["template"] < 2:                                          # a template needs two copies
        counts["template"] = 0
    n_cjk = math.ceil(0.6 * counts["cjk"])
    builder = _Builder(np.random.default_rng(seed))
    builder.add_originals(n_docs - sum(counts.values()), ["en", "ru", "de", "ko"], [0.5, 0.2, 0.15, 0.15],
                          60, 400, "unique")
    builder.add_templates(counts["template"])
    builder.add_originals(n_cjk, ["zh", "ja"], [0.5, 0.5], 120, 600, "cjk")
    builder.add_edited(counts["cjk"] - n_cjk, "cjk", 0.01, 0.04)
    builder.add_exact(counts["exact"])
    builder.add_edited(counts["near"], "unique", 0.01, 0.05)
    builder.add_short_and_empty(counts["short"], counts["empty"])
    return builder.frame(include_kind)


def write_demo_corpus(out_dir: str | os.PathLike, n_docs: int = 3000, seed: int = 0, n_shards: int = 3,
                      fmt: str = "jsonl") -> list[str]:
    """Write :func:`generate_corpus` output as ``n_shards`` consecutive files.

    Parameters
    ----------
    out_dir : str or os.PathLike
        Directory to write into; created if missing.
    n_docs : int, default 3000
        Number of documents.
    seed : int, default 0
        Seed passed to :func:`generate_corpus`.
    n_shards : int, default 3
        Number of files; rows are split in order into nearly equal parts.
    fmt : {"jsonl", "jsonl.gz", "parquet"}, default "jsonl"
        JSON Lines files are UTF-8, one object per line, non-ASCII kept as is (``ensure_ascii=False``);
        gzip headers carry no timestamp, so the files are byte-reproducible.

    Returns
    -------
    list of str
        Paths ``out_dir/part-000.<fmt>``, ``part-001.<fmt>``, ... in row order.
    """
    if fmt not in ("jsonl", "jsonl.gz", "parquet"):
        raise ArgumentError(f"fmt must be 'jsonl', 'jsonl.gz' or 'parquet', got {fmt!r}")
    if n_shards < 1:
        raise ArgumentError(f"n_shards must be >= 1, got {n_shards}")
    if n_docs < 0:  # before anything is written
        raise ArgumentError(f"the number of documents (n_docs, --docs) must be >= 0, got {n_docs}")
    os.makedirs(out_dir, exist_ok=True)
    df = generate_corpus(n_docs, seed)
    paths = []
    for shard, rows in enumerate(np.array_split(np.arange(len(df)), n_shards)):
        part, path = df.iloc[rows], os.path.join(os.fspath(out_dir), f"part-{shard:03d}.{fmt}")
        if fmt == "parquet":
            part.to_parquet(path, index=False)
        else:
            data = "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in part.to_dict("records"))
            with gzip.GzipFile(path, "wb", mtime=0) if fmt == "jsonl.gz" else open(path, "wb") as fh:
                fh.write(data.encode("utf-8"))
        paths.append(path)
    return paths
